"""Dagster Pipes over a real Slurm cluster (started by conftest.py on this machine): reports,
failures with their log tail, time limits, a stopped run cancelling its job, a job that never
reports, and the state readers falling back to sacct once the controller forgets a job."""

import sys
import time

import dagster as dg
import pytest

from assets.slurm_pipes import JOB_TAG, PipesSlurmClient
from pipelines.settings import PROJECT_ROOT, weft_home
from pipelines.slurm.jobs import SlurmCommands, SlurmError
from pipelines.slurm.script import SlurmSettings, TrainingLaunch, batch_script

pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm_cluster")]

REPORTS = """
import os
from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    pipes.log.info("hello from Slurm job " + os.environ["SLURM_JOB_ID"])
    pipes.report_asset_materialization(metadata={"answer": 42,
                                                 "seen_job_id": os.environ["SLURM_JOB_ID"]})
"""
FAILS = """
import sys
from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    print("about to fail: marker-7f3a", file=sys.stderr, flush=True)
    raise SystemExit(3)
"""
SLEEPS = """
import time
from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    pipes.log.info("sleeping")
    time.sleep(300)
"""
SILENT = "print('this script never opens Dagster Pipes')\n"


def _client(**kwargs) -> PipesSlurmClient:
    return PipesSlurmClient(poll_interval_s=0.5, report_grace_s=5, **kwargs)


def _script(tmp_path, code: str, **settings):
    """A ``script(env)`` builder: the one-node batch script running ``code``."""
    path = tmp_path / "job.py"
    path.write_text(code)
    slurm = SlurmSettings(python=sys.executable, workdir=str(PROJECT_ROOT),
                          weft_home=str(weft_home()), job_name="weft-test", **settings)
    launch = TrainingLaunch(module="job", args=(), one_node=(sys.executable, str(path)))
    return lambda env: batch_script(slurm, launch, env)


def _materialize(client, script, instance=None):
    @dg.asset(name="probe")
    def probe(context: dg.AssetExecutionContext):
        return client.run(context=context, script=script).get_materialize_result()

    return dg.materialize([probe], instance=instance or dg.DagsterInstance.ephemeral(),
                          raise_on_error=False)


def _failure(result) -> str:
    failure = result.failure_data_for_node("probe")
    return str(failure.user_failure_data.description if failure.user_failure_data
               else failure.error.message)


def test_a_pipes_job_reports_its_materialization_and_job_id(slurm_cluster, weft_home, tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    result = _materialize(_client(), _script(tmp_path, REPORTS), instance)
    assert result.success, _failure(result)
    (mat,) = result.asset_materializations_for_node("probe")
    job_id = mat.metadata["slurm_job_id"].value
    assert mat.metadata["answer"].value == 42
    assert mat.metadata["seen_job_id"].value == job_id  # reported from inside that job
    assert mat.metadata["slurm_state"].value == "COMPLETED"
    assert instance.get_run_by_id(result.run_id).tags[JOB_TAG] == job_id
    folder = weft_home / "pipes" / result.run_id / "probe" / "1"
    assert (folder / "messages.jsonl").is_file() and (folder / f"slurm-{job_id}.log").is_file()
    messages = [e.message for e in instance.all_logs(result.run_id)]
    assert any(f"hello from Slurm job {job_id}" in m for m in messages)


def test_a_failing_script_is_a_failure_with_its_state_and_log_tail(slurm_cluster, weft_home,
                                                                  tmp_path):
    result = _materialize(_client(), _script(tmp_path, FAILS))
    assert not result.success
    text = _failure(result)
    assert "FAILED" in text and "exit code 3:0" in text
    assert "marker-7f3a" in text  # the tail of the job's log


def test_a_job_past_its_time_limit_is_cancelled_and_the_error_says_so(slurm_cluster, weft_home,
                                                                      tmp_path):
    # Slurm rounds limits up to whole minutes; the launcher's own limit enforces 2 s here
    client = _client(time_limit="0:02", time_limit_grace_s=1)
    started = time.monotonic()
    result = _materialize(client, _script(tmp_path, SLEEPS, time_limit="0:02"))
    assert time.monotonic() - started < 25
    text = _failure(result)
    assert "CANCELLED" in text and "time limit 0:02" in text


def test_stopping_the_run_cancels_its_job(slurm_cluster, weft_home, tmp_path):
    client = _client()
    seen: list[str] = []
    read_state = client.commands.state

    def interrupted_once_running(job_id):
        state = read_state(job_id)
        if state.state == "RUNNING" and not seen:
            seen.append(job_id)
            raise dg.DagsterExecutionInterruptedError()  # what Dagster raises on termination
        return state

    client.commands.state = interrupted_once_running
    result = _materialize(client, _script(tmp_path, SLEEPS))
    assert not result.success and seen
    commands = SlurmCommands()
    deadline = time.monotonic() + 20
    while (state := commands.state(seen[0])).state != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state.state == "CANCELLED", state


def test_a_job_that_never_reports_is_a_failure_not_a_hang(slurm_cluster, weft_home, tmp_path):
    started = time.monotonic()
    result = _materialize(_client(), _script(tmp_path, SILENT))
    assert time.monotonic() - started < 25
    text = _failure(result)
    assert "COMPLETED" in text and "never reported through Dagster Pipes" in text
    assert "this script never opens Dagster Pipes" in text


def test_states_come_from_sacct_once_the_controller_forgets_the_job(slurm_cluster, tmp_path):
    commands = SlurmCommands()
    script = tmp_path / "quick.sh"
    script.write_text("#!/bin/bash\nexit 0\n")
    job_id = commands.submit(script, [f"--output={tmp_path}/quick-%j.log"])
    deadline = time.monotonic() + 40  # MinJobAge is 10 s on the test cluster
    while (state := commands.state(job_id)).source == "scontrol" and time.monotonic() < deadline:
        time.sleep(1)
    assert (state.state, state.source, state.exit_code) == (
        "COMPLETED", "sacct-completion", "0:0")


def test_sbatch_refusing_a_job_is_a_clear_error(slurm_cluster, tmp_path):
    script = tmp_path / "nowhere.sh"
    script.write_text("#!/bin/bash\n#SBATCH --partition=no-such-partition\ntrue\n")
    with pytest.raises(SlurmError, match="sbatch refused the job: .*[Ii]nvalid partition"):
        SlurmCommands().submit(script)


WAITS_FOR_USR1 = """
import os, sys, time
from dagster_pipes import open_dagster_pipes

log = os.environ["JOB_LOG"].replace("%j", os.environ["SLURM_JOB_ID"])
with open_dagster_pipes() as pipes:
    deadline = time.monotonic() + 55
    while "Slurm sent USR1" not in open(log).read() and time.monotonic() < deadline:
        time.sleep(0.5)
    pipes.report_asset_materialization(metadata={"survived_usr1": "Slurm sent USR1" in open(log).read()})
"""


@pytest.mark.slow  # 5-35 s: slurmctld sends time-limit signals from a 30 s timer
def test_the_time_limit_signal_is_trapped_and_logged(slurm_cluster, weft_home, tmp_path):
    """``--signal=B:USR1@55`` with a one-minute limit: the batch shell gets USR1 within the
    first half minute; the trap logs it and the job goes on (an untrapped USR1 would kill it)."""
    client = _client()
    script = _script(tmp_path, WAITS_FOR_USR1, time_limit="1", signal_before_s=55)

    def with_log_path(env):
        folder = next((weft_home / "pipes").glob("*/probe/*"))
        return script({**env, "JOB_LOG": str(folder / "slurm-%j.log")})

    result = _materialize(client, with_log_path)
    assert result.success, _failure(result)
    (mat,) = result.asset_materializations_for_node("probe")
    assert mat.metadata["survived_usr1"].value is True
