"""Runs made through ``cli.launcher`` are re-executable by Dagster itself: they carry their
remote and code origins, and Dagster's GraphQL ``launchRunReexecution`` (what the UI's
*Re-execute* button sends), run against a workspace loaded the way ``dagster dev -m MODULE``
loads it (a real code server process), re-executes them; the same mutation fails for a run made
by ``dg.materialize``. Also: what the launcher refuses before a run exists, and the demo's stage
runs (through ``cli.demo.demo_stage_run``) on weft's own code location."""

import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget
from dagster_graphql.test.utils import execute_dagster_graphql

from cli.demo import demo_run_config, demo_stage_run
from cli.instance import WeftUsageError, deep_merge
from cli.launcher import Launcher

ROOT = Path(__file__).resolve().parents[2]
LOCATION = "tests.cli.launch_location"
IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
REEXECUTE = """
mutation Reexecute($parentRunId: String!) {
  launchRunReexecution(reexecutionParams: {parentRunId: $parentRunId, strategy: ALL_STEPS}) {
    __typename
    ... on LaunchRunSuccess { run { runId parentRunId rootRunId } }
    ... on PythonError { message }
  }
}"""


@pytest.fixture
def instance(tmp_path, weft_home):
    """A persistent instance whose runs launch at once (the UI's instance queues them for the
    daemon `dagster dev` runs; here nothing dequeues, so the default coordinator launches)."""
    overrides = {"run_coordinator": {"module": "dagster._core.run_coordinator",
                                     "class": "DefaultRunCoordinator"},
                 "telemetry": {"enabled": False}}
    home = tmp_path / "dagster"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as inst:
        yield inst


@pytest.fixture
def launch_log(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "launch.log"
    monkeypatch.setenv("LAUNCH_LOG", str(path))
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _workspace(instance, module: str) -> WorkspaceProcessContext:
    """The workspace `dagster dev -m MODULE` serves: a code server process for the module."""
    return WorkspaceProcessContext(instance, ModuleTarget(module, None, str(ROOT), None))


def _reexecute(context, run_id: str) -> dict:
    result = execute_dagster_graphql(context, REEXECUTE, {"parentRunId": run_id})
    return result.data["launchRunReexecution"]


def _finished(instance, run_id: str, timeout: float = 240.0) -> dg.DagsterRun:
    deadline = time.monotonic() + timeout
    while True:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            return run
        assert time.monotonic() < deadline, f"run {run_id} did not finish: {run and run.status}"
        time.sleep(0.5)


def test_launched_runs_are_reexecuted_by_dagster_and_materialized_ones_are_not(instance,
                                                                               launch_log):
    with Launcher(instance, LOCATION) as launcher:
        job_run = launcher.launch("sum_job", run_config=IN_PROCESS)
        part_run = launcher.launch(selection="letter", partition="b", run_config=IN_PROCESS)
    assert job_run.status == part_run.status == dg.DagsterRunStatus.SUCCESS
    assert _lines(launch_log) == ["numbers", "total 10", "letter b"]  # 1 + 2 + 3 + 4
    for run, job in ((job_run, "sum_job"), (part_run, "__ASSET_JOB")):
        origin = run.remote_job_origin
        assert origin is not None and run.job_code_origin is not None
        assert origin.location_name == LOCATION and origin.job_name == job
        assert origin.repository_origin.repository_name == "__repository__"
        assert run.job_code_origin.job_name == job
    assert part_run.tags["dagster/partition"] == "b"
    assert part_run.asset_selection == {dg.AssetKey("letter")}

    ephemeral = dg.materialize([_numbers_asset()], instance=instance)
    plain = instance.get_run_by_id(ephemeral.run_id)
    assert plain.remote_job_origin is None and plain.job_name == "__ephemeral_asset_job__"
    with _workspace(instance, LOCATION) as workspace:
        context = workspace.create_request_context()
        for run in (job_run, part_run):
            answer = _reexecute(context, run.run_id)
            assert answer["__typename"] == "LaunchRunSuccess", answer
            again = _finished(instance, answer["run"]["runId"])
            assert again.status == dg.DagsterRunStatus.SUCCESS
            assert again.parent_run_id == again.root_run_id == run.run_id
            assert again.job_name == run.job_name
            assert again.asset_selection == run.asset_selection
            assert again.tags.get("dagster/partition") == run.tags.get("dagster/partition")
        runs_before = len(instance.get_runs())
        refused = _reexecute(context, plain.run_id)
        assert refused["__typename"] == "PythonError", refused
        assert len(instance.get_runs()) == runs_before  # nothing was launched for it
    # the re-executions really ran the steps again, in the code server's run workers
    assert _lines(launch_log) == ["numbers", "total 10", "letter b", "numbers", "numbers",
                                  "total 10", "letter b"]


def _numbers_asset():
    from tests.cli.launch_location import numbers

    return numbers


def test_config_tags_and_failures_are_recorded_on_the_run(instance, launch_log):
    with Launcher(instance, LOCATION) as launcher:
        scaled = launcher.launch(selection=["scaled"], tags={"team": "weft"}, run_config=deep_merge(
            IN_PROCESS, {"ops": {"scaled": {"config": {"factor": 3}}}}))
        broken = launcher.launch(selection="broken", run_config=IN_PROCESS)
    assert scaled.status == dg.DagsterRunStatus.SUCCESS and scaled.tags["team"] == "weft"
    assert scaled.run_config["ops"] == {"scaled": {"config": {"factor": 3}}}
    assert broken.status == dg.DagsterRunStatus.FAILURE
    assert _lines(launch_log) == ["scaled 3", "broken"]
    event = instance.get_latest_materialization_event(dg.AssetKey("scaled"))
    assert event is not None and event.run_id == scaled.run_id


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"job": "sum_jbo"}, "no job 'sum_jbo'. Did you mean sum_job"),
    ({"job": "sum_job", "partition": "a"}, "job 'sum_job' is not partitioned"),
    ({"selection": "letter"}, "selected assets of job '__ASSET_JOB' are partitioned"),
    ({"selection": "letter", "partition": "z"}, "partition 'z'"),
    ({"selection": "nosuch"}, "nosuch"),
    ({"selection": " , "}, "selection is empty"),
    ({"job": None}, "name a job or an asset selection"),
    ({"selection": "scaled", "run_config": {"ops": {"scaled": {"config": {"factor": "three"}}}}},
     "run config for job '__ASSET_JOB' is not valid"),
])
def test_bad_requests_are_explained_before_a_run_exists(instance, kwargs, message):
    with Launcher(instance, LOCATION) as launcher:
        request = dict(kwargs)
        job = request.pop("job", None)
        with pytest.raises(WeftUsageError, match=message):
            launcher.create_run(job, **request)
    assert instance.get_runs() == []


def test_a_failed_demo_stage_says_which_run_to_open(instance, launch_log, capsys):
    with Launcher(instance, LOCATION) as launcher:
        assert not demo_stage_run(launcher, "report", selection=["broken"],
                                  run_config=demo_run_config())
    (run,) = instance.get_runs()
    assert run.tags["weft/demo"] == "report" and run.status == dg.DagsterRunStatus.FAILURE
    said = capsys.readouterr()
    assert f"/runs/{run.run_id}" in said.out + said.err


def test_the_demos_stage_runs_come_from_weft_code_location_and_reexecute(instance,
                                                                         monkeypatch):
    """The demo's ingest stage, as ``cli.demo.run`` starts it, on the built-in generator:
    a run of ``ingest_job`` of ``assets.definitions`` that Dagster's GraphQL re-executes."""
    monkeypatch.delenv("WEFT_ENV", raising=False)
    selection = ["reasoning_gym_problems", "problems"]
    with Launcher(instance) as launcher:
        assert demo_stage_run(launcher, "ingest", "ingest_job", selection=selection,
                              run_config=demo_run_config())
    (run,) = instance.get_runs()
    assert run.job_name == "ingest_job" and run.tags["weft/demo"] == "ingest"
    assert run.remote_job_origin.location_name == "assets.definitions"
    assert run.job_code_origin.repository_origin.code_pointer.module == "assets.definitions"
    assert run.asset_selection == {dg.AssetKey(name) for name in selection}
    materialized = {r.event_log_entry.asset_materialization.asset_key.to_user_string()
                    for r in instance.get_records_for_run(
                        run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records}
    assert materialized == set(selection)
    with _workspace(instance, "assets.definitions") as workspace:
        answer = _reexecute(workspace.create_request_context(), run.run_id)
        assert answer["__typename"] == "LaunchRunSuccess", answer
        again = _finished(instance, answer["run"]["runId"])
    assert again.status == dg.DagsterRunStatus.SUCCESS and again.parent_run_id == run.run_id
    assert again.tags["weft/demo"] == "ingest"


def test_every_demo_stage_goes_through_the_launcher():
    """Each stage of ``cli.demo`` (ingest, eval, report, train, heldout) starts its run with
    ``demo_stage_run`` (a run of the code location's job); nothing in the demo starts one with
    ``materialize`` / ``execute_in_process`` (an ad-hoc job the UI cannot re-execute)."""
    import ast

    tree = ast.parse((ROOT / "cli" / "demo.py").read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    names = {ast.unparse(node.func).split(".")[-1] for node in calls}
    assert not names & {"materialize", "execute_in_process", "materialize_to_memory"}
    tags = {node.args[1].value for node in calls
            if ast.unparse(node.func) == "demo_stage_run" and isinstance(node.args[1], ast.Constant)}
    assert tags == {"ingest", "eval", "report", "train", "heldout"}


_EXIT_PROBE = r"""
import atexit, sys, threading, time
sys.path.insert(0, sys.argv[1])
from cli.launcher import _exit

def late():
    time.sleep(0.3)
    print("thread finished", flush=True)

atexit.register(lambda: print("atexit handler ran", flush=True))
threading.Thread(target=late).start()
sys.stderr.write("buffered, not flushed")  # no newline: still in the buffer
_exit(3)
"""


def test_the_launchers_exit_waits_for_threads_runs_atexit_and_flushes():
    """``python -m cli.launcher`` ends without the interpreter's teardown, but still as the
    interpreter would end a finished program: non-daemon threads joined, then atexit
    handlers, then the buffers flushed, with the run's exit code."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _EXIT_PROBE, str(repo)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["thread finished", "atexit handler ran"], done.stdout
    assert done.stderr.endswith("buffered, not flushed"), done.stderr[-2000:]
