"""The Dagster webserver serves weft's code location: assets and the schedule over GraphQL."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_webserver_lists_assets_and_schedule(tmp_path):
    home = tmp_path / "dagster_home"
    (home / ".nux").mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")
    port = _free_port()
    env = dict(os.environ, DAGSTER_HOME=str(home), WEFT_HOME=str(tmp_path / "weft"))
    exe = Path(sys.executable).with_name("dagster-webserver")
    proc = subprocess.Popen(
        [str(exe), "-m", "assets.definitions", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode(errors="replace")[-3000:] if proc.poll() is not None else ""
                    pytest.fail(f"webserver did not start (rc={proc.poll()}):\n{out}")
                time.sleep(0.5)
        assets = _graphql(port, "{ assetNodes { assetKey { path } groupName } }")
        keys = {"/".join(n["assetKey"]["path"]) for n in assets["data"]["assetNodes"]}
        assert {"problems", "eval_samples", "eval_scores", "gsm8k_problems"} <= keys
        schedules = _graphql(port, """{ workspaceOrError { ... on Workspace { locationEntries {
            locationOrLoadError { ... on RepositoryLocation { repositories { schedules { name cronSchedule } } } } } } } }""")
        names = [
            (s["name"], s["cronSchedule"])
            for entry in schedules["data"]["workspaceOrError"]["locationEntries"]
            for repo in entry["locationOrLoadError"]["repositories"]
            for s in repo["schedules"]
        ]
        assert ("nightly_eval", "0 2 * * *") in names
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode is not None
