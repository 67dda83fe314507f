"""weft's Dagster instance and the `weft` command: DAGSTER_HOME preparation, captured weft logs,
partition-key validation, the busy-port check of `make ui`, and a real shell materialization
that lands in the instance the UI reads."""

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from cli.instance import (
    WeftUsageError,
    add_model_partition,
    ensure_dagster_home,
    main,
    parse_eval_partition,
    port_problem,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dagster_home(weft_home, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return weft_home / "dagster"


def test_home_defaults_under_weft_home_and_captures_weft_loggers(dagster_home):
    assert ensure_dagster_home() == dagster_home.absolute()
    assert os.environ["DAGSTER_HOME"] == str(dagster_home.absolute())
    settings = yaml.safe_load((dagster_home / "dagster.yaml").read_text())
    assert settings["python_logs"]["python_log_level"] == "INFO"
    assert {"pipelines", "eval", "training"} <= set(settings["python_logs"]["managed_python_loggers"])
    assert (dagster_home / ".nux" / "nux.yaml").read_text() == "seen: 1\n"
    # a user's own python_logs settings are kept
    (dagster_home / "dagster.yaml").write_text("python_logs:\n  python_log_level: WARNING\n")
    ensure_dagster_home()
    kept = yaml.safe_load((dagster_home / "dagster.yaml").read_text())
    assert kept["python_logs"] == {"python_log_level": "WARNING"} and "telemetry" in kept


@dg.asset
def _chatty_asset() -> None:
    logging.getLogger("eval.runner").info("weft progress line 7/9")


def _run_log_messages(instance, run_id) -> list[str]:
    return [e.message or "" for e in instance.all_logs(run_id)]


def test_weft_loggers_reach_the_dagster_run_log(dagster_home):
    with dg.DagsterInstance.from_config(str(ensure_dagster_home())) as instance:
        result = dg.materialize([_chatty_asset], instance=instance)
        assert any("weft progress line 7/9" in m for m in _run_log_messages(instance, result.run_id))
    # the setting is what routes them: an instance without it does not capture the line
    bare = dagster_home.parent / "bare"
    bare.mkdir()
    (bare / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dg.DagsterInstance.from_config(str(bare)) as instance:
        result = dg.materialize([_chatty_asset], instance=instance)
        assert not any("weft progress" in m for m in _run_log_messages(instance, result.run_id))


@pytest.mark.parametrize("key, message", [
    ("gsm8k", "is not 'benchmark|model'"),
    ("gsm8k|", "is not 'benchmark|model'"),
    ("gsm8k|a|b", "is not 'benchmark|model'"),
    ("gsm8kk|m1", "Did you mean gsm8k"),
    ("m1|gsm8k", "parts swapped"),
    ("gsm8k|bad model", "must be 1-128 letters"),
    ("gsm8k|m2", "model 'm2' is not registered. Did you mean m1?"),
])
def test_bad_partition_keys_get_a_helpful_message(key, message):
    with pytest.raises(WeftUsageError, match=message.replace("|", r"\|").replace("?", r"\?")
                       .replace("(", r"\(")):
        parse_eval_partition(key, registered=["m1", "smollm2-135m-instruct"])


def test_good_partition_key_parses():
    assert parse_eval_partition("math500|m1", registered=["m1"]) == ("math500", "m1")


def test_add_model_partition_needs_a_registered_model(dagster_home):
    with dg.DagsterInstance.from_config(str(ensure_dagster_home())) as instance:
        with pytest.raises(WeftUsageError, match="not registered"):
            add_model_partition(instance, "ghost", ["m1"])
        assert add_model_partition(instance, "m1", ["m1"]) is True
        assert add_model_partition(instance, "m1", ["m1"]) is False
        assert instance.get_dynamic_partitions("models") == ["m1"]


def test_busy_port_is_detected_and_explained(capsys):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        problem = port_problem("127.0.0.1", port)
        assert problem and f"port {port} on 127.0.0.1 is already in use" in problem
        assert f"UI_PORT={port + 1}" in problem
        assert main(["check-port", "--port", str(port)]) == 2
        assert "already in use" in capsys.readouterr().err
        assert main(["ui", "--port", str(port)]) == 2  # refuses before starting dagster dev
    assert port_problem("127.0.0.1", port) is None
    assert main(["check-port", "--port", str(port)]) == 0


def _weft(args, env):
    return subprocess.run([sys.executable, "-m", "cli.instance", *args], check=False, cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_shell_materialize_lands_in_the_ui_instance(weft_home, shared_data, monkeypatch):
    """`weft materialize` (what the README tells users to run) with DAGSTER_HOME unset writes its
    run into WEFT_HOME/dagster, the instance `make ui` serves, and explains bad keys up front."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["WEFT_HOME"] = str(weft_home)
    config = {"ops": {"gsm8k_problems": {"config": {"limit": 3}}}}
    done = _weft(["materialize", "--select", "gsm8k_problems", "--config-json",
                  json.dumps(config)], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DAGSTER_HOME is not set" not in done.stderr  # no temporary-instance banner
    home = weft_home / "dagster"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        assert len(runs) == 1 and runs[0].is_success
        # made from the code location's asset job, so the UI can re-execute it
        assert runs[0].remote_job_origin.location_name == "assets.definitions"
        assert runs[0].job_code_origin.job_name == "__ASSET_JOB"
        event = instance.get_latest_materialization_event(dg.AssetKey("gsm8k_problems"))
        assert event is not None and event.run_id == runs[0].run_id
    # On success it says what happened and where to look (run id, asset, rows, UI, SQL).
    run_id = runs[0].run_id
    assert f"[weft] run {run_id} (__ASSET_JOB): SUCCESS" in done.stdout
    assert done.stdout.count(f"[weft] run {run_id}") == 1  # said once (by the run's process)
    assert "[weft]   materialized gsm8k_problems: 3 rows" in done.stdout
    assert f"/runs/{run_id}" in done.stdout and f"WHERE run_id = '{run_id}'" in done.stdout


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_stopping_weft_cancels_the_run_keeps_its_record_and_stops_dagster(weft_home):
    """SIGTERM to `weft job` while an asset computes: the `dagster` child and what it started
    stop, the Dagster run ends canceled, and the asset's `runs` row says canceled."""
    import signal
    import time

    from warehouse.store import Warehouse

    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["WEFT_HOME"] = str(weft_home)
    # a long grace: weft must return as soon as the interrupted run has ended, not wait it out
    env["WEFT_STOP_GRACE_S"] = "900"
    proc = subprocess.Popen([sys.executable, "-m", "cli.instance", "job",
                             "ep_deliberation_claim_job", "--config-json",
                             json.dumps({"scale": "cpu"})], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    home = weft_home / "dagster"
    deadline = time.monotonic() + 240
    started = False
    while time.monotonic() < deadline and proc.poll() is None and not started:
        time.sleep(2)
        if (home / "storage").exists():
            with dg.DagsterInstance.from_config(str(home)) as instance:
                runs = instance.get_runs()
                started = bool(runs) and any(
                    r.event_log_entry.step_key for r in instance.get_records_for_run(
                        runs[0].run_id, of_type=dg.DagsterEventType.STEP_START).records)
    assert started, "the run never reached its step"
    time.sleep(5)  # inside the asset's computation now
    dagster_children = _children(proc.pid)
    assert dagster_children, "weft runs dagster as a child process"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "stopping the run (SIGTERM)" in out
    assert not any(_alive(pid) for pid in dagster_children)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_runs()[0]
        assert run.status == dg.DagsterRunStatus.CANCELED
    assert out.count(f"[weft] run {run.run_id} ({run.job_name}): ") == 1, out[-3000:]  # once
    rows = Warehouse(weft_home / "warehouse").read("runs").to_pylist()
    mine = [r for r in rows if r["run_id"] == run.run_id]
    assert mine and all(r["status"] == "canceled" for r in mine), mine
    assert not Warehouse(weft_home / "warehouse").read("claims").num_rows



def test_any_dagster_command_runs_on_the_weft_instance(dagster_home, capfd):
    assert main(["dagster", "instance", "info"]) == 0
    out = capfd.readouterr().out
    assert f"$DAGSTER_HOME: {dagster_home.absolute()}" in out
    assert "python_logs" in out and "managed_python_loggers" in out


def test_materialize_refuses_bad_eval_partitions_before_dagster_runs(dagster_home, capsys):
    assert main(["materialize", "--select", "eval_samples", "--partition", "gsm8k"]) == 2
    assert "is not 'benchmark|model'" in capsys.readouterr().err
    assert main(["materialize", "--select", "eval_samples,eval_scores"]) == 2
    assert "add --partition 'benchmark|model'" in capsys.readouterr().err
    assert main(["materialize", "--select", "eval_samples", "--partition",
                 "gsm8k|not-registered"]) == 2
    assert "is not registered" in capsys.readouterr().err
    assert not (dagster_home / "history").exists()  # no run was started


@pytest.mark.parametrize("select, partition, message", [
    # static partitions: the key must be one of the listed ones, and the message lists them
    ("ep_episodes", "assistant.epp",
     "not one of its partition keys for ep_episodes. Did you mean assistant.ep"),
    ("ep_episodes", None, "add --partition KEY, one of its partition keys: assistant.agentloop"),
    ("mosaic_trajectories,mosaic_baseline_trajectories", "gsm8k_train",
     "Valid keys: gsm8k, math, deepscaler, dapo_math_17k, reasoning_gym"),
    # a key for assets that have no partitions
    ("problems", "gsm8k", "problems is not partitioned: drop --partition"),
    ("gsm8k_problems,math500_problems", "x", "are not partitioned: drop --partition"),
    # one run cannot mix partitionings (Dagster refuses it with a generic error)
    ("ep_episodes,mosaic_trajectories", "gsm8k", "partitioned differently"),
    # an asset name that does not exist
    ("eval_sample", "gsm8k|m1", "did you mean one of the following"),
    ("", None, "--select is empty"),
])
def test_materialize_checks_every_partitioned_assets_key(dagster_home, capsys, select, partition,
                                                         message):
    args = ["materialize", "--select", select]
    assert main(args + ([] if partition is None else ["--partition", partition])) == 2
    assert message in capsys.readouterr().err
    assert not (dagster_home / "history").exists()  # no run was started


def test_partition_check_accepts_valid_keys_and_reads_dynamic_ones_from_the_instance(
        dagster_home):
    from cli.instance import check_partition

    assert check_partition("ep_episodes", "kitchen.reflexpatch") is None
    assert check_partition("mosaic_trajectories", "reasoning_gym") is None
    assert check_partition("problems", None) is None
    assert check_partition("eval_samples", "gsm8k|m1", registered=["m1"]) == "m1"

    runs = dg.DynamicPartitionsDefinition(name="runs")

    @dg.asset(partitions_def=runs)
    def per_run() -> None: ...

    graph = dg.Definitions(assets=[per_run]).resolve_asset_graph()
    with dg.DagsterInstance.from_config(str(ensure_dagster_home())) as instance:
        with pytest.raises(WeftUsageError, match="not one of the instance's `runs` partitions "
                                                 "for per_run. Valid keys: none yet"):
            check_partition("per_run", "r1", instance, asset_graph=graph)
        instance.add_dynamic_partitions("runs", ["r1", "r2"])
        assert check_partition("per_run", "r2", instance, asset_graph=graph) is None
        with pytest.raises(WeftUsageError, match="Valid keys: r1, r2"):
            check_partition("per_run", "r3", instance, asset_graph=graph)


@pytest.mark.slow
def test_weft_ui_serves_and_a_second_one_refuses(weft_home):
    """`weft ui` (what `make ui` runs) starts `dagster dev` on WEFT_HOME/dagster; a second one
    on the same port exits 2 naming the Dagster UI that holds it. ~90 s on a busy 2-core box."""
    import signal
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["WEFT_HOME"] = str(weft_home)
    first = subprocess.Popen([sys.executable, "-m", "cli.instance", "ui", "--port", str(port)],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, up = time.monotonic() + 240, False
        while time.monotonic() < deadline and not up and first.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                    up = True
            except OSError:
                time.sleep(2)
        assert up, "dagster dev did not answer /server_info"
        assert (weft_home / "dagster" / "dagster.yaml").is_file()
        second = _weft(["ui", "--port", str(port)], env)
        assert second.returncode == 2 and "already in use by a Dagster UI" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        try:
            first.wait(timeout=60)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait()


def test_run_config_merges_files_then_json_and_explains_bad_input(tmp_path):
    import argparse

    from cli.instance import run_config_of

    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("ops:\n  problems:\n    config: {limit: 3, prefer: hub}\nexecution: {}\n")
    second.write_text("ops:\n  problems:\n    config: {limit: 5}\n")
    args = argparse.Namespace(config=[str(first), str(second)],
                              config_json='{"ops": {"traces": {"config": {"limit": 1}}}}')
    assert run_config_of(args) == {
        "ops": {"problems": {"config": {"limit": 5, "prefer": "hub"}},
                "traces": {"config": {"limit": 1}}},
        "execution": {}}
    bad = tmp_path / "bad.yaml"
    for text, message in (("ops: [unclosed", "is not valid YAML"),
                          ("- a list\n", "must hold a mapping")):
        bad.write_text(text)
        with pytest.raises(WeftUsageError, match=message):
            run_config_of(argparse.Namespace(config=[str(bad)], config_json=None))
    with pytest.raises(WeftUsageError, match="does not exist"):
        run_config_of(argparse.Namespace(config=[str(tmp_path / "none.yaml")], config_json=None))
    with pytest.raises(WeftUsageError, match="not valid JSON"):
        run_config_of(argparse.Namespace(config=None, config_json="{scale: cpu"))
    with pytest.raises(WeftUsageError, match="must be a JSON object"):
        run_config_of(argparse.Namespace(config=None, config_json="[1]"))
